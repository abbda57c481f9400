"""The lake: where the jobs' tables and checkpoints are (a local folder or an object store), and who may write."""
