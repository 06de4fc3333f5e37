"""Tests of `rltap.store`. A package, so pytest imports its files as `store.test_<name>` and a
basename shared with another test folder (`tests/tree/test_export.py`) does not clash."""
