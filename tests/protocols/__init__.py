"""Tests of `rltap.protocols`: one package per wire API, as in the source.

The folders are packages (each test folder holds a `test_request.py`, `test_response.py` and
`test_stream.py`), so pytest imports them as `protocols.<api>.test_request` and the basenames
do not clash.
"""
