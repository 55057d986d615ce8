{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType,
             MultiParamTypeClasses, FlexibleInstances, TypeFamilies #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The weight memories the filter engine ("K2C.Engine") walks: the ROM of a
layer's weight file ('WeightRom', "K2C.Memory", walked by
"K2C.EngineWeights"), or the same file in a block RAM a host writes at run
time ('WeightRam', written from "K2C.WeightBus"). The engine's code is the
same for both; the memory chooses its walk ('WeightMemory').

= A writable memory

A 'WeightRam' is walked as the ROM is ("K2C.EngineWeights"), with two
additions, both on registers. Clash's block RAM writes only when enabled, so
its write port's valid (a register of 'K2C.WeightBus.writable') enables it
too; and a write while idle also reads (at the address register, word 1), so
the word held for the next window would no longer be word 0. The address
therefore goes to word 0 in the cycle after each write, and the RAM reads once
more in the cycle after the last write (@refresh@): two cycles after a
message's last write the RAM holds word 0 again, with what was written, and
the address is word 1. Both changes are before the address register's input
and on the enable; the address itself is still a register with nothing
between it and the RAM. A window whose steps begin while this is under way
would read the wrong words: the top entity closes its image input during a
weight message and for a few cycles after ('K2C.WeightBus.closedWhile'), and
the host writes between images.

= Hardware

The RAM: the ROM's words and width, a simple dual-port block RAM (one read
port, one write port) initialised from the file; a one-bit @refresh@
register. The write port's register is 'K2C.WeightBus.writable''s.
-}
module K2C.WeightMemory
  ( WeightMemory (..)
  , WeightRam (..)
  , readWritable
  ) where

import Clash.Prelude

import K2C.EngineWeights (stepWeights)
import K2C.Memory (Neuron, WeightRom (..))
import K2C.Window (nextIndex)

-- | A weight memory the engine walks ('K2C.EngineWeights.stepWeights' for a
-- ROM, 'ramWeights' for a writable one).
class WeightMemory m dom where
  -- | The memory word of the current step, given whether this cycle is a
  -- step; between windows, word 0.
  walkWeights
    :: ( HiddenClockResetEnable dom
       , KnownNat n, KnownNat p, KnownNat ch, BitPack w, BitPack bias )
    => m n p ch w bias
    -> Signal dom Bool
    -> Signal dom (Vec p (Neuron ch w bias))

instance WeightMemory WeightRom dom where
  walkWeights = stepWeights

instance dom ~ dom' => WeightMemory (WeightRam dom) dom' where
  walkWeights = ramWeights

-- | A weight memory written at run time: the ROM file it starts from, and its
-- write port, one word a cycle (the address, and the word laid out as the
-- file's, "K2C.Memory").
data WeightRam dom (words :: Nat) (p :: Nat) (ch :: Nat) w bias =
  WeightRam (WeightRom words p ch w bias) (Signal dom (Maybe (Index words, Vec p (Neuron ch w bias))))

-- | 'K2C.Memory.readWeights' of a 'WeightRam': a block RAM with the file's
-- contents, read at @address@ (the answer one cycle later) and written from
-- its port. The hidden enable gates reads and writes alike, as Clash's block
-- RAM does.
readWritable
  :: forall dom words p ch w bias
   . ( HiddenClock dom, HiddenEnable dom
     , KnownNat words, KnownNat p, KnownNat ch, BitPack w, BitPack bias )
  => WeightRam dom words p ch w bias
  -> Signal dom (Index words)
  -> Signal dom (Vec p (Neuron ch w bias))
readWritable (WeightRam (WeightRom path) writes) address =
  unpack <$> blockRamFile (SNat @words) path address (fmap (fmap pack) <$> writes)

-- | The walk of a writable memory (the module header, "A writable memory").
ramWeights
  :: forall dom n p ch w bias
   . ( HiddenClockResetEnable dom
     , KnownNat n, KnownNat p, KnownNat ch, BitPack w, BitPack bias )
  => WeightRam dom n p ch w bias
  -> Signal dom Bool
  -> Signal dom (Vec p (Neuron ch w bias))
ramWeights weights@(WeightRam _ writes) busy =
  andEnable (busy .||. firstRead .||. writing .||. refresh) (readWritable weights ahead)
  where
    writing   = maybe False (const True) <$> writes
    refresh   = register False writing
    ahead     = register (0 :: Index n)
                  (mux busy (nextIndex <$> ahead) (mux writing (pure 0) (pure (nextIndex 0))))
    firstRead = register True (pure False)
