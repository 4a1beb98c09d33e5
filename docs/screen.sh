read go
printf '\033[H\033[2J'
printf '\033[1;32m$\033[m make test\n'
printf '   \033[1mCompiling\033[m latch v0.1.0\n'
printf '\033[32mtest\033[m capture::colours_and_attributes ... \033[1;32mok\033[m\n'
printf '\033[32mtest\033[m svg::hostile_cells_stay_text ... \033[1;32mok\033[m\n'
printf '\033[32mtest\033[m png::size_is_capped ... \033[1;31mFAILED\033[m\n'
printf '\n\033[1;33mwarning\033[m: \033[3munused variable\033[m `\033[4mcols\033[m`\n\n'
for i in 0 1 2 3 4 5 6 7; do printf '\033[4%sm   \033[m' $i; done; printf '  '
for i in 0 1 2 3 4 5 6 7; do printf '\033[10%sm   \033[m' $i; done; echo
i=16; while [ $i -lt 88 ]; do printf '\033[48;5;%sm \033[m' $i; i=$((i+1)); done; echo
i=0; while [ $i -lt 72 ]; do printf '\033[48;2;%s;%s;200m \033[m' $((i*3)) $((255-i*3)); i=$((i+1)); done; echo
printf '\ncaf\303\251 e\314\201 combining  \033[7m inverse \033[m \033[9mstruck\033[m \033[2mdim\033[m\n\n'
printf '\033[1;34m~/latch\033[m \033[35m(main)\033[m $ '
sleep 100000
