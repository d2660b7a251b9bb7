import sys

from billing.invoice import invoice_total


def main(argv):
    lines = [("item", float(a)) for a in argv]
    print("Total:", invoice_total(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
