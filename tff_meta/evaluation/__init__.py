"""Personalized evaluation (adapt on support, score on query) and its summaries."""
