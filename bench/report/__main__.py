from bench.report.build import main

main()
