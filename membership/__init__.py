"""SWIM member-list: a pure protocol core and a network runtime."""
