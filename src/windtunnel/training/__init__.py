"""Training: the one loop for every task and architecture (`train`), its optimisers and schedules (`optim`), recipes
as data (`recipes`), curricula (`curriculum`) and experiment trackers (`tracking`)."""
