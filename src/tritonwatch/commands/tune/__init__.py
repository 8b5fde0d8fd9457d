"""``tritonwatch tune``: measure, change one parameter, re-measure, keep or roll back."""
