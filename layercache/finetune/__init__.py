"""FT mode: the live backbone (`live`), the data that feeds it to the training loop (`data`), freezing."""
