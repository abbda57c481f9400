"""Applying each offset once: applied offsets in Delta commits, resent events, poison records, Spark checkpoints."""
