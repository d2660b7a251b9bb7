from billing.invoice import invoice_total
from billing.utils import calc_total


def test_calc_total():
    assert calc_total([1, 2, 3]) == 6


def test_invoice_total():
    assert invoice_total([("a", 100.0)]) == 119.0
