{-# LANGUAGE DataKinds, NoImplicitPrelude, TypeApplications, TemplateHaskell, RankNTypes,
             FlexibleContexts, MonoLocalBinds #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Small synthesizable tops, one per stream block, to check that Clash turns
each block into Verilog that Verilator lints. Run from clash_lib:

> clash -i. -itest/stream test/stream/Tops.hs --verilog -fclash-no-cache \
>   -fclash-hdldir /tmp/k2c-tops/hdl -outputdir /tmp/k2c-tops/obj
> for d in /tmp/k2c-tops/hdl/Tops.*; do verilator --lint-only -Wno-WIDTH $d/*.v; done

Covered: the window with a block-RAM line buffer (kh = 3), its one-column
bypass (w = 1) and its no-line-buffer case (kh = 1); pad in front of a window;
max pooling; average pooling by a power of two (shift) and by 9 (divider);
pad with no padding (must be a wire) and with columns only;
collect.
-}
module Tops where

import Clash.Prelude hiding (window)

import K2C.Collect (collect)
import K2C.Pad (pad)
import K2C.Pool (avgPool, maxPool)
import K2C.Stream (Stream, (|>))
import K2C.Window (window)
import TopPorts (ports)

type Px = Signed 8
type Fx = SFixed 4 4

-- | Wrap a stream block as a top entity with explicit clock, reset, enable.
asTop
  :: (HiddenClockResetEnable System => Stream System a b)
  -> Clock System -> Reset System -> Enable System
  -> Signal System (Maybe a) -> Signal System Bool
  -> (Signal System (Maybe b), Signal System Bool)
asTop block clk rst en input readyOut =
  withClockResetEnable clk rst en block (input, readyOut)

windowTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 2 Px)) -> Signal System Bool
  -> (Signal System (Maybe (Vec 3 (Vec 3 (Vec 2 Px)))), Signal System Bool)
windowTop = asTop (window d5 d7 d3 d3 d1 d1)
{-# NOINLINE windowTop #-}
{-# ANN windowTop (ports "window_top") #-}

windowColumnTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 2 Px)) -> Signal System Bool
  -> (Signal System (Maybe (Vec 2 (Vec 1 (Vec 2 Px)))), Signal System Bool)
windowColumnTop = asTop (window d6 d1 d2 d1 d1 d1)
{-# NOINLINE windowColumnTop #-}
{-# ANN windowColumnTop (ports "window_column_top") #-}

windowRowTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 1 Px)) -> Signal System Bool
  -> (Signal System (Maybe (Vec 1 (Vec 2 (Vec 1 Px)))), Signal System Bool)
windowRowTop = asTop (window d4 d4 d1 d2 d1 d2)
{-# NOINLINE windowRowTop #-}
{-# ANN windowRowTop (ports "window_row_top") #-}

padWindowTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 1 Px)) -> Signal System Bool
  -> (Signal System (Maybe (Vec 3 (Vec 3 (Vec 1 Px)))), Signal System Bool)
padWindowTop = asTop (pad d5 d5 d1 d1 d1 d1 0 |> window d7 d7 d3 d3 d1 d1)
{-# NOINLINE padWindowTop #-}
{-# ANN padWindowTop (ports "pad_window_top") #-}

maxPoolTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 2 Fx)) -> Signal System Bool
  -> (Signal System (Maybe (Vec 2 Fx)), Signal System Bool)
maxPoolTop = asTop (maxPool d6 d6 d2 d2 d2 d2)
{-# NOINLINE maxPoolTop #-}
{-# ANN maxPoolTop (ports "max_pool_top") #-}

avgPoolShiftTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 2 Fx)) -> Signal System Bool
  -> (Signal System (Maybe (Vec 2 Fx)), Signal System Bool)
avgPoolShiftTop = asTop (avgPool d6 d6 d2 d2 d2 d2)
{-# NOINLINE avgPoolShiftTop #-}
{-# ANN avgPoolShiftTop (ports "avg_pool_shift_top") #-}

avgPoolDivideTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 1 Fx)) -> Signal System Bool
  -> (Signal System (Maybe (Vec 1 Fx)), Signal System Bool)
avgPoolDivideTop = asTop (avgPool d7 d7 d3 d3 d2 d2)
{-# NOINLINE avgPoolDivideTop #-}
{-# ANN avgPoolDivideTop (ports "avg_pool_divide_top") #-}

collectTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 2 Px)) -> Signal System Bool
  -> (Signal System (Maybe (Vec 18 Px)), Signal System Bool)
collectTop = asTop (collect d9)
{-# NOINLINE collectTop #-}
{-# ANN collectTop (ports "collect_top") #-}

-- | Pad with no padding: must be a wire (no registers of its own).
padNoneTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 1 Px)) -> Signal System Bool
  -> (Signal System (Maybe (Vec 1 Px)), Signal System Bool)
padNoneTop = asTop (pad d5 d5 d0 d0 d0 d0 0)
{-# NOINLINE padNoneTop #-}
{-# ANN padNoneTop (ports "pad_none_top") #-}

-- | Pad of columns only (left 1, right 2), alone.
padColumnsTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 1 Px)) -> Signal System Bool
  -> (Signal System (Maybe (Vec 1 Px)), Signal System Bool)
padColumnsTop = asTop (pad d5 d5 d0 d0 d1 d2 0)
{-# NOINLINE padColumnsTop #-}
{-# ANN padColumnsTop (ports "pad_columns_top") #-}
