{-# LANGUAGE DataKinds, TypeFamilies, MonoLocalBinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Table activations (docs/guide/contract.md, "Activations", table functions): sigmoid, tanh, elu,
selu, softplus, softsign, silu, gelu, exponential.

= Arithmetic

The input's raw value @r@ (format @SFixed ii fi@) is shifted right
arithmetically by @s@ bits (a floor) and offset by the table's first bucket
@low@; the index is clipped to the table, so inputs below (above) the range
read the first (last) entry, which the compiler sets to the function's
saturated value. Entry @k@ is the function at the centre of bucket
@low + k@, rounded half up and saturated to the output format (computed once
in Python; the golden model reads the same numbers). 'lutLinear' adds a linear
right side: inputs @r > from@ give @round(k * x)@ ('scaleRound', the slope @k@
in 16 fraction bits, one exact product, one rounding half up, saturated), as
elu's @x@ or selu's @scale * x@. The maximum error over every input is
computed by the compiler and written next to each use in Network.hs.

= Storage

The table is one memory file or several bit slices of it ('TableRom'), one
entry per line in ASCII binary, MSB first, each read by an asynchronous ROM
('asyncRomFile'): a @$readmemb@ array in the HDL. Each element of a beat has
its own copy (a @Vec c@ beat is @c@ ROMs).

Why slices: a table deeper than a block RAM's deepest mode at its width
(ECP5's DP16KD: 1024 words of 18 bits, 2048 of 9) is split by synthesis
into block RAMs stacked in depth, with a multiplexer on their outputs, after
the block RAM's slow read (5.6 ns): that would be the critical path of iris and
mobilenet_digits (block RAM -> multiplexer -> register, 10 to 12 ns). Slices
as narrow as the deepest mode (9 bits for up to 2048 words) are each one
block RAM, read side by side, no multiplexer (iris' softmax table of 1155
14-bit words: two block RAMs, where synthesis on its own uses one and LUTs for
the words past 1024). The compiler chooses the slices (keras2clash/backend/activations.py).

= Timing

Combinational: no register, no state; a stage built from it (a 'K2C.Stream.mapS')
passes valid and ready through in the same cycle.
-}
module K2C.Lut
  ( TableRom (..)
  , tableFile
  , beside
  , bitTable
  , lut
  , lutLinear
  , scaleRound
  ) where

import Clash.Prelude

import K2C.Activation (requantize)

-- | A table of @n@ entries of type @a@: how to read entry @i@ (asynchronous
-- ROMs from memory files: 'tableFile', side by side: 'beside').
data TableRom (n :: Nat) a = TableRom (Index n -> a)

-- | A table in one memory file of @BitSize a@-bit words.
tableFile :: forall n a . (KnownNat n, BitPack a) => FilePath -> TableRom n a
tableFile path = TableRom (unpack . asyncRomFile (SNat @n) path)

-- | Two tables of bit slices side by side: the left one holds the high bits.
beside :: (KnownNat b) => TableRom n (BitVector a) -> TableRom n (BitVector b) -> TableRom n (BitVector (a + b))
beside (TableRom high) (TableRom low) = TableRom (\i -> high i ++# low i)

-- | A table of raw words read as values of type @a@.
bitTable :: BitPack a => TableRom n (BitVector (BitSize a)) -> TableRom n a
bitTable (TableRom raw) = TableRom (unpack . raw)

-- | The table lookup: entry @clip((r >> s) - low, 0, n - 1)@. @low@ is given
-- 14 bits wider than the input, so it and @n - 1@ (at most 2^13) always fit.
lut
  :: forall n s ii fi oi fo
   . (KnownNat n, 1 <= n, KnownNat ii, KnownNat fi, KnownNat oi, KnownNat fo)
  => SNat s -> Signed (ii + fi + 14) -> TableRom n (SFixed oi fo) -> SFixed ii fi -> SFixed oi fo
lut s low (TableRom rom) = \x -> rom (index x)
  where
    top = fromInteger (natToInteger @n - 1) :: Signed (ii + fi + 14)
    -- the bounds are compared with the shifted input itself, beside the subtraction rather
    -- than after it (k <= 0 iff y <= low; k >= top iff y >= low + top, no overflow in the
    -- 14 extra bits), and only the index's bits of k are used: a short carry chain and two
    -- comparisons with constants in parallel before the ROM's address
    index x
      | y <= low       = 0
      | y >= low + top = maxBound
      | otherwise      = fromIntegral (y - low)
      where
        y = resize (shiftR (unSF x) (snatToNum s))

-- | 'lut' below and at @from@, @round(k * x)@ above it (the function's linear side).
lutLinear
  :: forall n s kb ii fi oi fo
   . (KnownNat n, 1 <= n, KnownNat kb, KnownNat ii, KnownNat fi, KnownNat oi, KnownNat fo)
  => SNat s -> Signed (ii + fi + 14) -> TableRom n (SFixed oi fo) -> Signed (ii + fi) -> SFixed kb 16
  -> SFixed ii fi -> SFixed oi fo
lutLinear s low rom from k = \x -> if unSF x > from then scaleRound k x else table x
  where
    table = lut s low rom

-- | @round(k * x)@: the exact product (@SFixed (kb + ii) (16 + fi)@), then
-- 'requantize' (round half up, saturate).
scaleRound
  :: forall kb ii fi oi fo
   . (KnownNat kb, KnownNat ii, KnownNat fi, KnownNat oi, KnownNat fo)
  => SFixed kb 16 -> SFixed ii fi -> SFixed oi fo
scaleRound k x = requantize (k `mul` x :: SFixed (kb + ii) (16 + fi))
