"""FT mode: the live backbone (`live`), the data that feeds it to the training loop (`data`; MLM
blocks, `mlm`; what their splits share, `states`), freezing."""
