sed -i 's/    return s.lstrip("-")/    return s.strip("-")/' textkit/slug.py
