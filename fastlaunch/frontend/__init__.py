"""The tracing front end: tracers, the traced NumPy/SciPy/math surface, argument trees and
normalisation, loops traced or rolled into the graph.  Knows nothing of backends."""
