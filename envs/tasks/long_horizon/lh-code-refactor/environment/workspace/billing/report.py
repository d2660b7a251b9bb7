from billing import utils


def vat_share(amounts):
    net = utils.calc_total(amounts)
    return round(net * 0.19, 2)
