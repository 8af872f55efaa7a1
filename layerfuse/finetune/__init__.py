"""FT mode: the live backbone (`live`), the data that feeds it to the training loop (`data`; MLM
blocks, `mlm`; their live splits, `states`), freezing."""
