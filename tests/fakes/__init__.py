"""Fakes for tests: real servers on 127.0.0.1 standing in for outside services."""
