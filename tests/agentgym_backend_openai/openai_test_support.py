"""Constants shared by this folder's tests (a uniquely named module: pytest imports test dirs flat)."""

SERVED_NAME = "tiny-chat"
"""The model id the test server serves the tiny random model as."""
