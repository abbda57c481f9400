"""What each kind of job does with a batch: the batch's context, dead letters, the kinds' writes."""
