"""The program: the typed intermediate form between the readers (and the generator) and the
engine."""
