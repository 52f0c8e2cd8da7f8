"""The IR and fusion: the graph and its building with NumPy's semantics, differentiation,
leaves, the backend-neutral kernel description and fusion into a plan.  Knows nothing of
backends or of the front end."""
