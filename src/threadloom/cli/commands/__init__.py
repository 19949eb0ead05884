"""The commands of `threadloom`, one module per command."""
