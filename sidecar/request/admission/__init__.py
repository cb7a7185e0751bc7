"""Admission: the director (director.py) and one module for each of its stages."""
