"""What the tests stand on: scripted upstream servers, the proxy and redis-server as processes,
the transcripts, polling. No tests here; fixtures stay in the conftest.py files."""
