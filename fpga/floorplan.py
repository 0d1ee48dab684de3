"""Block RAM floorplan of the whole accelerator (product configuration, 1 lane) on
LFE5U-85F: the bel of each of its 146 DP16KDs, by instance path.

nextpnr's electrostatic placer puts the block RAMs anew at every seed, and the rest of the
design follows them: one netlist placed at 92.89 / 84.19 / 75.98 MHz (nextpnr's estimate
before routing) at seeds 1 / 2 / 3 and routed at 100.39 / 99.86 / 98.98 MHz, and at nextpnr's
target of 105 MHz seed 3 had not routed after 400 iterations. These sites are those seed 1
chose for that netlist: the CAM's 32 in the EBR row at Y22 and the left of Y46, the cold-key
set's 48 on the left of Y46 and Y70, the learner's 64 on the right of Y46, Y70 and Y82. With
them fixed, seeds 2 and 3 of the same netlist placed at 87.22 and 91.70 MHz. `fpga.blocks`
passes them to `hotline.fpga.synth.apply_floorplan`; the report counts the cells it fixed.
Cells not in the netlist are skipped, so a renamed memory is merely unplaced: regenerate the
table from a placed netlist (``nextpnr-ecp5 ... --write placed.json``, each cell's
``NEXTPNR_BEL`` attribute) when the block RAMs change: ``python -m hotline.fpga.floorplan
NETLIST`` (`bram_sites`, `write_table`). The accelerator's flow writes ``routed.json``, but
a placement with the floorplan returns these sites: new ones need a placement without it.
Sites so taken from the placement of the current netlist at seed 3 without a floorplan (all
32 CAM block RAMs in the Y22 row, the cold-key set's at Y46, the learner's at Y70 and Y82)
did worse than these: at seed 3 nextpnr's pre-route estimate fell from 78.96 to 68.19 MHz
and router2 still had 11-46 arcs failing at 106 MHz after 230 iterations, where with these
it routed at 105.37 MHz.
"""

import json
import re
import sys
from pathlib import Path

__all__ = ["ACCELERATOR_ECP5_BRAM", "bram_sites", "write_table"]


def bram_sites(netlist, cell_type="DP16KD"):
    """{instance path: bel} of every ``cell_type`` cell of nextpnr's placed or routed JSON
    ``netlist`` (a path; ``--write``: one flat module, each placed cell's bel in its
    ``NEXTPNR_BEL`` attribute), sorted by path. Unplaced cells are an error."""
    design = json.loads(Path(netlist).read_text())
    sites = {}
    for module in design["modules"].values():
        for name, cell in module["cells"].items():
            if cell["type"] == cell_type:
                bel = cell["attributes"].get("NEXTPNR_BEL")
                if not bel:
                    raise ValueError(f"{cell_type} {name} of {netlist} is not placed")
                sites[name] = bel
    return dict(sorted(sites.items()))


def write_table(sites, name="ACCELERATOR_ECP5_BRAM", path=__file__):
    """Replace the table ``name`` of this module's source (``path``) by ``sites``, formatted
    as it is; returns the number of entries."""
    source = Path(path).read_text()
    body = "".join(f'    "{cell}": "{bel}",\n' for cell, bel in sites.items())
    new, n = re.subn(rf"^{name} = {{\n.*?^}}\n", lambda _: f"{name} = {{\n{body}}}\n", source,
                     flags=re.M | re.S)
    if n != 1:
        raise ValueError(f"no table {name} in {path}")
    Path(path).write_text(new)
    return len(sites)

ACCELERATOR_ECP5_BRAM = {
    "dut0.core.dma.write.data_fifo.storage.0.0": "X78/Y22/EBR0",
    "dut0.core.dma.write.data_fifo.storage.0.1": "X82/Y22/EBR2",
    "dut0.core.fragmenter.cam.table0.bram_0_0": "X55/Y22/EBR3",
    "dut0.core.fragmenter.cam.table0.bram_0_18": "X53/Y22/EBR2",
    "dut0.core.fragmenter.cam.table0.bram_1_0": "X46/Y22/EBR3",
    "dut0.core.fragmenter.cam.table0.bram_1_18": "X15/Y22/EBR1",
    "dut0.core.fragmenter.cam.table0.bram_2_0": "X40/Y22/EBR0",
    "dut0.core.fragmenter.cam.table0.bram_2_18": "X51/Y22/EBR1",
    "dut0.core.fragmenter.cam.table0.bram_3_0": "X37/Y22/EBR3",
    "dut0.core.fragmenter.cam.table0.bram_3_18": "X49/Y22/EBR0",
    "dut0.core.fragmenter.cam.table0.bram_4_0": "X44/Y22/EBR2",
    "dut0.core.fragmenter.cam.table0.bram_4_18": "X17/Y22/EBR2",
    "dut0.core.fragmenter.cam.table0.bram_5_0": "X37/Y46/EBR3",
    "dut0.core.fragmenter.cam.table0.bram_5_18": "X42/Y22/EBR1",
    "dut0.core.fragmenter.cam.table0.bram_6_0": "X26/Y46/EBR2",
    "dut0.core.fragmenter.cam.table0.bram_6_18": "X13/Y22/EBR0",
    "dut0.core.fragmenter.cam.table0.bram_7_0": "X69/Y46/EBR0",
    "dut0.core.fragmenter.cam.table0.bram_7_18": "X10/Y22/EBR3",
    "dut0.core.fragmenter.cam.table1.bram_0_0": "X80/Y46/EBR1",
    "dut0.core.fragmenter.cam.table1.bram_0_18": "X24/Y22/EBR1",
    "dut0.core.fragmenter.cam.table1.bram_1_0": "X35/Y46/EBR2",
    "dut0.core.fragmenter.cam.table1.bram_1_18": "X35/Y22/EBR2",
    "dut0.core.fragmenter.cam.table1.bram_2_0": "X28/Y46/EBR3",
    "dut0.core.fragmenter.cam.table1.bram_2_18": "X19/Y22/EBR3",
    "dut0.core.fragmenter.cam.table1.bram_3_0": "X31/Y46/EBR0",
    "dut0.core.fragmenter.cam.table1.bram_3_18": "X22/Y22/EBR0",
    "dut0.core.fragmenter.cam.table1.bram_4_0": "X87/Y46/EBR0",
    "dut0.core.fragmenter.cam.table1.bram_4_18": "X33/Y22/EBR1",
    "dut0.core.fragmenter.cam.table1.bram_5_0": "X89/Y46/EBR1",
    "dut0.core.fragmenter.cam.table1.bram_5_18": "X28/Y22/EBR3",
    "dut0.core.fragmenter.cam.table1.bram_6_0": "X33/Y46/EBR1",
    "dut0.core.fragmenter.cam.table1.bram_6_18": "X31/Y22/EBR0",
    "dut0.core.fragmenter.cam.table1.bram_7_0": "X78/Y46/EBR0",
    "dut0.core.fragmenter.cam.table1.bram_7_18": "X26/Y22/EBR2",
    "dut0.core.fragmenter.cold.table0_0.bram_0_0": "X37/Y70/EBR3",
    "dut0.core.fragmenter.cold.table0_0.bram_0_18": "X6/Y70/EBR1",
    "dut0.core.fragmenter.cold.table0_0.bram_0_27": "X40/Y70/EBR0",
    "dut0.core.fragmenter.cold.table0_0.bram_0_36": "X33/Y70/EBR1",
    "dut0.core.fragmenter.cold.table0_0.bram_0_45": "X69/Y82/EBR0",
    "dut0.core.fragmenter.cold.table0_0.bram_0_9": "X80/Y70/EBR1",
    "dut0.core.fragmenter.cold.table0_0.bram_1_0": "X35/Y70/EBR2",
    "dut0.core.fragmenter.cold.table0_0.bram_1_18": "X26/Y70/EBR2",
    "dut0.core.fragmenter.cold.table0_0.bram_1_27": "X78/Y70/EBR0",
    "dut0.core.fragmenter.cold.table0_0.bram_1_36": "X31/Y70/EBR0",
    "dut0.core.fragmenter.cold.table0_0.bram_1_45": "X24/Y70/EBR1",
    "dut0.core.fragmenter.cold.table0_0.bram_1_9": "X82/Y70/EBR2",
    "dut0.core.fragmenter.cold.table0_0.bram_2_0": "X46/Y82/EBR3",
    "dut0.core.fragmenter.cold.table0_0.bram_2_18": "X4/Y70/EBR0",
    "dut0.core.fragmenter.cold.table0_0.bram_2_27": "X75/Y70/EBR3",
    "dut0.core.fragmenter.cold.table0_0.bram_2_36": "X71/Y82/EBR1",
    "dut0.core.fragmenter.cold.table0_0.bram_2_45": "X8/Y70/EBR2",
    "dut0.core.fragmenter.cold.table0_0.bram_2_9": "X69/Y70/EBR0",
    "dut0.core.fragmenter.cold.table0_0.bram_3_0": "X71/Y70/EBR1",
    "dut0.core.fragmenter.cold.table0_0.bram_3_18": "X22/Y70/EBR0",
    "dut0.core.fragmenter.cold.table0_0.bram_3_27": "X42/Y70/EBR1",
    "dut0.core.fragmenter.cold.table0_0.bram_3_36": "X84/Y70/EBR3",
    "dut0.core.fragmenter.cold.table0_0.bram_3_45": "X10/Y70/EBR3",
    "dut0.core.fragmenter.cold.table0_0.bram_3_9": "X46/Y70/EBR3",
    "dut0.core.fragmenter.cold.table1_0.bram_0_0": "X73/Y46/EBR2",
    "dut0.core.fragmenter.cold.table1_0.bram_0_18": "X13/Y46/EBR0",
    "dut0.core.fragmenter.cold.table1_0.bram_0_27": "X6/Y46/EBR1",
    "dut0.core.fragmenter.cold.table1_0.bram_0_36": "X51/Y82/EBR1",
    "dut0.core.fragmenter.cold.table1_0.bram_0_45": "X13/Y70/EBR0",
    "dut0.core.fragmenter.cold.table1_0.bram_0_9": "X71/Y46/EBR1",
    "dut0.core.fragmenter.cold.table1_0.bram_1_0": "X44/Y70/EBR2",
    "dut0.core.fragmenter.cold.table1_0.bram_1_18": "X17/Y46/EBR2",
    "dut0.core.fragmenter.cold.table1_0.bram_1_27": "X10/Y46/EBR3",
    "dut0.core.fragmenter.cold.table1_0.bram_1_36": "X73/Y70/EBR2",
    "dut0.core.fragmenter.cold.table1_0.bram_1_45": "X15/Y70/EBR1",
    "dut0.core.fragmenter.cold.table1_0.bram_1_9": "X19/Y46/EBR3",
    "dut0.core.fragmenter.cold.table1_0.bram_2_0": "X24/Y46/EBR1",
    "dut0.core.fragmenter.cold.table1_0.bram_2_18": "X98/Y46/EBR1",
    "dut0.core.fragmenter.cold.table1_0.bram_2_27": "X4/Y46/EBR0",
    "dut0.core.fragmenter.cold.table1_0.bram_2_36": "X102/Y70/EBR3",
    "dut0.core.fragmenter.cold.table1_0.bram_2_45": "X17/Y70/EBR2",
    "dut0.core.fragmenter.cold.table1_0.bram_2_9": "X22/Y46/EBR0",
    "dut0.core.fragmenter.cold.table1_0.bram_3_0": "X28/Y70/EBR3",
    "dut0.core.fragmenter.cold.table1_0.bram_3_18": "X15/Y46/EBR1",
    "dut0.core.fragmenter.cold.table1_0.bram_3_27": "X8/Y46/EBR2",
    "dut0.core.fragmenter.cold.table1_0.bram_3_36": "X100/Y70/EBR2",
    "dut0.core.fragmenter.cold.table1_0.bram_3_45": "X19/Y70/EBR3",
    "dut0.core.fragmenter.cold.table1_0.bram_3_9": "X75/Y46/EBR3",
    "dut0.core.learner.table0.bram_0_0": "X89/Y22/EBR1",
    "dut0.core.learner.table0.bram_0_18": "X82/Y46/EBR2",
    "dut0.core.learner.table0.bram_0_27": "X82/Y82/EBR2",
    "dut0.core.learner.table0.bram_0_36": "X87/Y70/EBR0",
    "dut0.core.learner.table0.bram_0_45": "X53/Y70/EBR2",
    "dut0.core.learner.table0.bram_0_54": "X58/Y70/EBR0",
    "dut0.core.learner.table0.bram_0_63": "X53/Y82/EBR2",
    "dut0.core.learner.table0.bram_0_9": "X91/Y46/EBR2",
    "dut0.core.learner.table1.bram_0_0": "X96/Y46/EBR0",
    "dut0.core.learner.table1.bram_0_18": "X49/Y46/EBR0",
    "dut0.core.learner.table1.bram_0_27": "X93/Y70/EBR3",
    "dut0.core.learner.table1.bram_0_36": "X96/Y70/EBR0",
    "dut0.core.learner.table1.bram_0_45": "X62/Y82/EBR2",
    "dut0.core.learner.table1.bram_0_54": "X84/Y82/EBR3",
    "dut0.core.learner.table1.bram_0_63": "X64/Y46/EBR3",
    "dut0.core.learner.table1.bram_0_9": "X51/Y46/EBR1",
    "dut0.core.learner.table2.bram_0_0": "X46/Y46/EBR3",
    "dut0.core.learner.table2.bram_0_18": "X44/Y46/EBR2",
    "dut0.core.learner.table2.bram_0_27": "X51/Y70/EBR1",
    "dut0.core.learner.table2.bram_0_36": "X87/Y82/EBR0",
    "dut0.core.learner.table2.bram_0_45": "X55/Y70/EBR3",
    "dut0.core.learner.table2.bram_0_54": "X89/Y70/EBR1",
    "dut0.core.learner.table2.bram_0_63": "X49/Y70/EBR0",
    "dut0.core.learner.table2.bram_0_9": "X93/Y46/EBR3",
    "dut0.core.learner.table3.bram_0_0": "X53/Y46/EBR2",
    "dut0.core.learner.table3.bram_0_18": "X55/Y46/EBR3",
    "dut0.core.learner.table3.bram_0_27": "X89/Y82/EBR1",
    "dut0.core.learner.table3.bram_0_36": "X98/Y82/EBR1",
    "dut0.core.learner.table3.bram_0_45": "X105/Y70/EBR0",
    "dut0.core.learner.table3.bram_0_54": "X98/Y70/EBR1",
    "dut0.core.learner.table3.bram_0_63": "X60/Y46/EBR1",
    "dut0.core.learner.table3.bram_0_9": "X105/Y46/EBR0",
    "dut0.core.learner.table4.bram_0_0": "X111/Y46/EBR3",
    "dut0.core.learner.table4.bram_0_18": "X84/Y46/EBR3",
    "dut0.core.learner.table4.bram_0_27": "X111/Y70/EBR3",
    "dut0.core.learner.table4.bram_0_36": "X109/Y70/EBR2",
    "dut0.core.learner.table4.bram_0_45": "X64/Y82/EBR3",
    "dut0.core.learner.table4.bram_0_54": "X64/Y70/EBR3",
    "dut0.core.learner.table4.bram_0_63": "X55/Y82/EBR3",
    "dut0.core.learner.table4.bram_0_9": "X107/Y46/EBR1",
    "dut0.core.learner.table5.bram_0_0": "X40/Y46/EBR0",
    "dut0.core.learner.table5.bram_0_18": "X42/Y46/EBR1",
    "dut0.core.learner.table5.bram_0_27": "X120/Y70/EBR3",
    "dut0.core.learner.table5.bram_0_36": "X96/Y82/EBR0",
    "dut0.core.learner.table5.bram_0_45": "X107/Y70/EBR1",
    "dut0.core.learner.table5.bram_0_54": "X91/Y70/EBR2",
    "dut0.core.learner.table5.bram_0_63": "X102/Y46/EBR3",
    "dut0.core.learner.table5.bram_0_9": "X120/Y46/EBR3",
    "dut0.core.learner.table6.bram_0_0": "X109/Y46/EBR2",
    "dut0.core.learner.table6.bram_0_18": "X58/Y46/EBR0",
    "dut0.core.learner.table6.bram_0_27": "X116/Y70/EBR1",
    "dut0.core.learner.table6.bram_0_36": "X93/Y82/EBR3",
    "dut0.core.learner.table6.bram_0_45": "X60/Y70/EBR1",
    "dut0.core.learner.table6.bram_0_54": "X60/Y82/EBR1",
    "dut0.core.learner.table6.bram_0_63": "X58/Y82/EBR0",
    "dut0.core.learner.table6.bram_0_9": "X116/Y46/EBR1",
    "dut0.core.learner.table7.bram_0_0": "X114/Y46/EBR0",
    "dut0.core.learner.table7.bram_0_18": "X62/Y46/EBR2",
    "dut0.core.learner.table7.bram_0_27": "X118/Y70/EBR2",
    "dut0.core.learner.table7.bram_0_36": "X114/Y70/EBR0",
    "dut0.core.learner.table7.bram_0_45": "X62/Y70/EBR2",
    "dut0.core.learner.table7.bram_0_54": "X91/Y82/EBR2",
    "dut0.core.learner.table7.bram_0_63": "X100/Y46/EBR2",
    "dut0.core.learner.table7.bram_0_9": "X118/Y46/EBR2",
}


if __name__ == "__main__":  # python -m hotline.fpga.floorplan ROUTED_JSON
    print(f"{write_table(bram_sites(sys.argv[1]))} block RAM sites written to {__file__}")
