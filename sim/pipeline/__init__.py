"""Pipeline schedules as data: each schedule's op order, constraints and ideal bubble."""
