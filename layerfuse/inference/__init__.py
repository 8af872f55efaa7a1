"""Prediction: a trained head plus its backbone tags new text (`Predictor`) or fills masks (`MaskFiller`)."""

from .fill_mask import MaskFiller
from .predictor import Predictor, entities
from .words import split_words

__all__ = ["MaskFiller", "Predictor", "entities", "split_words"]
