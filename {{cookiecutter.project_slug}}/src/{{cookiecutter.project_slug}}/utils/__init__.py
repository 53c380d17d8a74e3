"""What any PyTorch project could copy: the reproducibility settings (repro.py, and hashseed.py,
its torch-free part), the device (device.py) and the seeded DataLoader factory (data.py). They
import nothing of this package outside utils/, and data.py needs only repro.py; each module's
docstring says what to call, in which order.
"""
