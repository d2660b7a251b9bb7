make clean && make dist && make check
