def calc_total(amounts):
    return sum(amounts)


def fmt_money(x):
    return str(round(x, 2))


def deprecated_round(x):
    return int(x + 0.5)
