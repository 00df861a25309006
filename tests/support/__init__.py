"""What the tests share (conftest.py keeps only fixtures; nothing imports from it):

- app: the real app over ASGI for given settings (``running_app``), its logs (``logged_service``)
- settings: settings builders (``fast_settings``, ``llm_settings``...)
- tasks: task bodies, tasks created, filled, read back and finished through the API
- conversations: messages built by hand
- waits: bounded waits on background jobs and final summaries
- payloads, threads, routes, metrics, timestamps: reading what the API answers
- errors, unchanged, files: the one error shape, "a refusal changed nothing", a task's files
- corpus, paths: the shared corpus and schemas beside the repository (../shared)
- formats, schemas: payloads rendered and validated against their providers' schemas and SDKs
- records, reference, database, cleanup: records, contexts and rows as the service keeps them
- asgi_raw, lifespan, postgres, server, load, backends: running the app and the fakes around it
"""
