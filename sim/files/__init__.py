"""Reading and writing files safely, and the shipped data by name."""
