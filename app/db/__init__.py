"""Database: models, engine and sessions, migrations."""
