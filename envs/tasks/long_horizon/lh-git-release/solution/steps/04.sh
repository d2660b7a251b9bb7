cd repo
sed -i 's|    return a // b|    return a / b|' calc.py
git commit -qam "Fix divide"
