"""Prediction: a trained head plus its backbone tags new text (`Predictor`)."""

from .predictor import Predictor, entities, split_words

__all__ = ["Predictor", "entities", "split_words"]
