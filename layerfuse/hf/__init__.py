"""Trained heads as transformers models: `export_head` writes a folder that
``AutoModelForTokenClassification.from_pretrained`` and ``pipeline("token-classification")`` load once
layerfuse is imported (`register` adds its config and model classes to transformers' auto classes).

Nothing here is imported by ``import layerfuse`` except the small import hook in `register`, so the
package stays light until transformers itself is used."""
