sed -i 's/(50, "L"), (10, "X")/(90, "XC"), (50, "L"), (40, "XL"), (10, "X")/' textkit/roman.py
