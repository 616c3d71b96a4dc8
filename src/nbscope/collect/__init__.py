"""Collection that runs in the nbscope process: reading what the in-kernel probe recorded."""
