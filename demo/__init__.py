"""`make demo`: a sample workload through every stage. The one package that may import them all."""
