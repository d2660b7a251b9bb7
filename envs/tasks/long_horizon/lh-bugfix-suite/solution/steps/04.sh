sed -i 's/        out\[key\] = value.strip()/        out[key.strip()] = value.strip()/' textkit/parse.py
