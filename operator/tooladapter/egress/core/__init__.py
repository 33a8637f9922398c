"""The pure rules of egress: what a lease allows, and how requests and answers are read."""
