"""Migration revisions, oldest first. Each one is reviewed by hand against the models."""
