"""Applying each offset once: applied offsets in Delta commits, the writer lock, resent events, poison records, Spark checkpoints."""
