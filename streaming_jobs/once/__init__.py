"""Applying each offset once: a batch's context, applied offsets in Delta commits, resent events, topic identity."""
