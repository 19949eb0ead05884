"""LangGraph's own test suites run on threadloom's classes (a manual check: run.py)."""
