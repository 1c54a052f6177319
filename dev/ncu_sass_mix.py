#!/usr/bin/env python3
"""The instruction mix of one kernel from dev/ncu_source.sh's SASS CSV: executed warp instructions by
kind, divided by a unit (e.g. warps x tiles, for instructions a thread a tile).

    dev/ncu_sass_mix.py NAME-sass.csv UNIT [KIND,...]   (KINDs: list that kind's opcodes too)

The kinds are a reading aid for the quantizer kernels: floating point (the rounding arithmetic),
Philox's multiplies and xors, its round keys, SR's byte draws and carries, memory, control,
uniform-datapath and constant loads, compares and selects, moves, other integer work."""
import csv
import re
import sys
from collections import Counter

FP = {'FADD', 'FFMA', 'FMUL', 'FMNMX.NAN', 'F2FP.BF16.F32.PACK_AB', 'MUFU.RCP', 'FADD.FTZ', 'FSETP.GE.AND', 'FSETP.GTU.OR'}
MEM = {'LDS.U16', 'STS.U16', 'LDS.128', 'STG.E.128', 'LDS.64', 'LDGSTS.E.BYPASS.128', 'LDS', 'LDG.E', 'LDG.E.64', 'STS.128', 'LDS.U8',
       'STS', 'STL.128', 'LDL.128'}
CONTROL = {'BRA', 'BSSY', 'BSYNC', 'BAR.SYNC.DEFER_BLOCKING', 'DEPBAR.LE', 'LDGDEPBAR', 'BREAK', 'WARPSYNC.ALL', 'VOTEU.ALL', 'EXIT'}
MOVES = {'IMAD.MOV.U32', 'MOV', 'IMAD.U32', 'HFMA2.MMA', 'CS2R'}
PHILOX_M = ('-0x2daee0ad', '-0x326172a9')  # the multipliers as signed immediates


def kind(op, s):
    if op in FP:
        return 'fp'
    if op == 'IMAD.HI.U32' or (op == 'IMAD' and any(m in s for m in PHILOX_M)) or (op == 'LOP3.LUT' and s.endswith('0x96, !PT')):
        return 'philox'
    if op in ('VIADD', 'IADD3') and re.search(r', (0x|-0x)[0-9a-f]{7,8}(, RZ)?$', s):
        return 'philox-keys'
    if op == 'PRMT' or (op == 'LEA.HI' and ', RZ, 0x8' in s):
        return 'sr-bytes'
    if op == 'LOP3.LUT' and ('0xffffff00' in s or ('0x80000000, R' in s and '0xf8' in s)):
        return 'sr-carry/sign'
    if op in MEM or op.startswith('LDGSTS'):
        return 'mem'
    if op in CONTROL:
        return 'control'
    if op.startswith('U') or op in ('R2UR', 'S2UR', 'S2R', 'LDC.64', 'LDC', 'LDC.U8'):
        return 'uniform/const'
    if op.startswith('ISETP') or op.startswith('PLOP3') or op == 'SEL':
        return 'compare/select'
    if op in MOVES:
        return 'moves'
    return 'int-other'


def main():
    path, unit = sys.argv[1], float(sys.argv[2])
    show = set(sys.argv[3].split(',')) if len(sys.argv) > 3 else set()
    rows = list(csv.reader(open(path)))
    hdr = rows[1]
    n_col, src_col = hdr.index('Instructions Executed'), hdr.index('Source')
    kinds, ops = Counter(), Counter()
    for r in rows[2:]:
        n = int(r[n_col] or 0)
        if n == 0:
            continue
        s = re.sub(r'^@!?U?P\w+\s+', '', r[src_col].strip())
        op = s.split()[0]
        k = kind(op, s)
        kinds[k] += n / unit
        ops[(k, op)] += n / unit
    for k, v in kinds.most_common():
        print(f'{k:16s} {v:8.1f}')
    print(f'{"total":16s} {sum(kinds.values()):8.1f}')
    for (k, op), v in ops.most_common():
        if k in show:
            print(f'  {k:14s} {op:24s} {v:7.1f}')


if __name__ == '__main__':
    main()
