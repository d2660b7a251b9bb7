sed -i '1i __all__ = ["VAT_RATE", "compute_total", "fmt_money"]\n' billing/money.py
