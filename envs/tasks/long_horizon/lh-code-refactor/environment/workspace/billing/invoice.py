from billing.utils import calc_total, fmt_money


def invoice_total(lines):
    """lines: list of (description, amount). Total including 19% VAT."""
    net = calc_total([amount for _, amount in lines])
    return round(net * (1 + 0.19), 2)


def render(lines):
    out = [f"{d}: {fmt_money(a)}" for d, a in lines]
    out.append(f"TOTAL: {fmt_money(invoice_total(lines))}")
    return "\n".join(out)
