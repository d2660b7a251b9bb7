mkdir -p calcpkg/src/calc calcpkg/tests && cp LICENSE calcpkg/LICENSE
