"""The backend conformance suite: the seam's promises, on every backend."""
