"""Every command; the options they share are declared once in `options`."""
