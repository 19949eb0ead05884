"""Pure functions under everything else: hashing (and, later, chunking and compression).

This layer imports nothing from the rest of threadloom.
"""
