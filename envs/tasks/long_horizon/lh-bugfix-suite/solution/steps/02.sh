sed -i 's/<= width + 1:/<= width:/' textkit/wrap.py
