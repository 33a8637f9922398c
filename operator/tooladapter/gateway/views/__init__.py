"""How tools, calls and problems look through the gateway: pure functions over plain data."""
