"""Fuzzing the service end to end: random conversations (model.py) played against the real app
(driver.py), the invariants (invariants.py) checked after every step; runner.py and
``python -m tests.fuzz`` run many in parallel (``make fuzz``)."""
