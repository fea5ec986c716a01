import torch
from torch import nn

from pronghorn.diagnostics import DeadUnits


def test_dead_units_counts_units_never_positive_over_the_batch():
    torso = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    lin = torso[0]
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.copy_(torch.tensor([1.0, -1.0, -1.0, 0.0]))  # unit 0 alive, units 1-3 never positive
        lin.weight[2, 0] = 1.0  # unit 2: positive only where x0 > 1
    probe = DeadUnits(torso)
    x = torch.tensor([[0.0, 0, 0], [0.5, 0, 0]])
    torso[0](x)
    assert probe.read() == {}  # not armed: nothing recorded
    probe.arm()
    torso[0](x)
    assert probe.read() == {"dead/0": 0.75}
    probe.arm()
    torso[0](torch.tensor([[3.0, 0, 0]]))  # one sample where unit 2 fires
    assert probe.read() == {"dead/0": 0.5}


def test_conv_channels_are_alive_if_any_position_is_positive():
    conv = nn.Conv2d(1, 2, 1)
    with torch.no_grad():
        conv.weight.fill_(1.0)
        conv.bias.copy_(torch.tensor([-0.5, -2.0]))
    probe = DeadUnits(nn.Sequential(conv))
    image = torch.zeros(1, 1, 4, 4)
    image[0, 0, 2, 3] = 1.0  # one pixel: channel 0 fires there, channel 1 never
    probe.arm()
    conv(image)
    assert probe.read() == {"dead/0": 0.5}
    probe.close()
