sed -i 's/    return str(round(x, 2))/    return f"{x:,.2f}"/' billing/money.py
